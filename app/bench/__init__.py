"""The benchmark suite behind `raykafka bench` (`suite.py`, over one file of
rows per client family, `clients_*.py`, rendered by `report.py`), and the
codec and hot-path tables it includes (`record_batches.py`, `hot_paths.py`), each also runnable
alone with `python -m raykafka.app.bench.<module>`."""
