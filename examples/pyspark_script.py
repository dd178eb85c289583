"""A plain PySpark script, with no flinkyarn import: counts the lines of a text file by
their first word and writes the counts as Parquet.

usage: flinkyarn run --pyspark examples/pyspark_script.py INPUT OUTPUT
       (or: spark-submit examples/pyspark_script.py INPUT OUTPUT)
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(input_path: str, output_path: str) -> None:
    spark = SparkSession.builder.appName("first words").getOrCreate()
    lines = spark.read.text(input_path)
    first = lines.select(F.lower(F.split(F.trim("value"), r"\s+").getItem(0)).alias("first_word"))
    counts = first.where(F.col("first_word") != "").groupBy("first_word").count()
    counts.coalesce(1).write.mode("overwrite").parquet(output_path)
    print(f"wrote {counts.count()} first words to {output_path}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
