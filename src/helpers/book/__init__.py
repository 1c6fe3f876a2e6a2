"""The book's machinery: the runbook, parameters, where a run's results live, glue, figures, data loading."""
