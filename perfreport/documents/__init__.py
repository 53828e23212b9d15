"""The JSON documents perfreport writes (summary.json, report.json, the stores' manifests): how
they are encoded (:mod:`~perfreport.documents.jsondoc`), the values they hold until then
(:mod:`~perfreport.documents.cells`), and laid out for reading
(:mod:`~perfreport.documents.layout`), and what they keep of the tables that grow with a trace's
calls and steps (:mod:`~perfreport.documents.table_rows`)."""
