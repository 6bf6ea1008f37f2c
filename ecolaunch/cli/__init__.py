"""The command-line interface: the only place that prints, reads ``sys.argv`` or exits."""
