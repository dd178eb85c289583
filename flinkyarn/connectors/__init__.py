"""Sources and sinks of pipelines: files (text, CSV, Parquet) on local disks and HDFS,
and a generator source for tests."""

from flinkyarn.connectors.files import (
    CsvSink,
    CsvSource,
    FileFormatError,
    ParquetSink,
    ParquetSource,
    TextSource,
)
from flinkyarn.connectors.generator import GeneratorSource

__all__ = ["CsvSink", "CsvSource", "FileFormatError", "GeneratorSource", "ParquetSink",
           "ParquetSource", "TextSource"]
