"""The base every other subpackage stands on: where a run's results live and what they hold (`layout`,
`results`), parameters and their checks (`params`), loading the recorded data under data/ (`recorded`),
glue, tables and figures for the pages (`glue`, `tables`, `plotting`), and bounded child processes
(`procs`). It imports nothing else from `helpers` (tests/test_imports.py holds that)."""
