"""Extra links of the Primus operators."""
