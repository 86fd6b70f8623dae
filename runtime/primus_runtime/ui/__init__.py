"""The job's web page and the read side of its API, served by the AM and by the history server."""
