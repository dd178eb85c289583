"""The flinkyarn client: CLI, cluster descriptors, submission, REST client."""
