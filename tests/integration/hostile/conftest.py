"""The hostile-input suite starts its own `stockade serve` per case (each case ends it with SIGTERM); see
hostile_server.py for the acceptance criteria every case checks."""
