"""The wordcount of examples/wordcount.py as a PyFlink Table API program, for
bench/peers.py: words are the maximal runs of [a-z0-9] in the lower-cased text, counted
per word, written as CSV (word,count). Everything runs in Flink's JVM operators (built-in
SQL functions, no Python UDF): PyFlink at its fastest.

usage: python -m flink_wordcount INPUT OUTPUT PARALLELISM   (or flink run ... -pym flink_wordcount)
"""

from __future__ import annotations

import sys

from pyflink.table import EnvironmentSettings, TableEnvironment


def main(source: str, sink: str, parallelism: int) -> None:
    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    env.get_config().set("parallelism.default", str(parallelism))
    env.execute_sql(f"CREATE TABLE lines (line STRING) WITH ("
                    f"'connector' = 'filesystem', 'path' = '{source}', 'format' = 'raw')")
    env.execute_sql(f"CREATE TABLE counts (word STRING, n BIGINT) WITH ("
                    f"'connector' = 'filesystem', 'path' = '{sink}', 'format' = 'csv')")
    env.execute_sql(
        "INSERT INTO counts SELECT word, COUNT(*) FROM lines "
        "CROSS JOIN UNNEST(SPLIT(REGEXP_REPLACE(LOWER(line), '[^a-z0-9]+', ' '), ' ')) AS t (word) "
        "WHERE word <> '' GROUP BY word").wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
