"""HTA's ``hta.analyzers`` module paths that user code and HTA's tests import from."""
