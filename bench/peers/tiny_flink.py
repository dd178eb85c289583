"""The tiny job of bench/peers.py, Flink's side (PyFlink Table API): the numbers 0..999,
counted per n mod 10 after a hash exchange, written as CSV (k,count) to OUTPUT.

usage: flink run -t yarn-session -Dyarn.application.id=APP -py bench/peers/tiny_flink.py OUTPUT
"""

from __future__ import annotations

import sys

from pyflink.table import EnvironmentSettings, TableEnvironment


def main(sink: str) -> None:
    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    env.get_config().set("parallelism.default", "2")
    env.execute_sql("CREATE TABLE numbers (n BIGINT) WITH ('connector' = 'datagen', "
                    "'number-of-rows' = '1000', 'fields.n.kind' = 'sequence', "
                    "'fields.n.start' = '0', 'fields.n.end' = '999')")
    env.execute_sql(f"CREATE TABLE counts (k BIGINT, n BIGINT) WITH ("
                    f"'connector' = 'filesystem', 'path' = '{sink}', 'format' = 'csv')")
    env.execute_sql("INSERT INTO counts SELECT MOD(n, 10), COUNT(*) FROM numbers "
                    "GROUP BY MOD(n, 10)").wait()


if __name__ == "__main__":
    main(sys.argv[1])
