"""The JSON documents perfreport writes (summary.json, report.json, the stores' manifests): how
they are encoded (:mod:`~perfreport.documents.jsondoc`) and laid out for reading
(:mod:`~perfreport.documents.layout`)."""
