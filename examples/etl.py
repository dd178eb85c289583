"""ETL: orders and customers from CSV; a join and an aggregation in Spark stages;
revenue per country to Parquet.

    orders.csv:    order_id,customer_id,amount
    customers.csv: customer_id,name,country
    output:        country (string), orders (int64), revenue (double), one row per country

usage: flinkyarn run examples/etl.py --orders PATH --customers PATH --output DIR
"""

from __future__ import annotations

import argparse

from flinkyarn import Pipeline


def join_customers(orders, customers):
    return orders.join(customers, on="customer_id", how="inner").select("country", "amount")


def revenue_per_country(rows):
    from pyspark.sql import functions as F

    return rows.groupBy("country").agg(F.count("*").alias("orders"),
                                       F.sum("amount").cast("double").alias("revenue"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", required=True)
    parser.add_argument("--customers", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()

    pipeline = Pipeline("etl", parallelism=args.parallelism)
    orders = pipeline.read_csv(args.orders).key_by("customer_id")
    customers = pipeline.read_csv(args.customers).key_by("customer_id")
    joined = orders.spark(join_customers, customers, name="join customers")
    revenue = joined.key_by("country").spark(revenue_per_country, name="revenue per country")
    revenue.write_parquet(args.output)
    pipeline.execute()


if __name__ == "__main__":
    main()
