import pytest

from flinkyarn.configuration import Configuration
from flinkyarn.spark.class_data import SparkClassData
from yarn_client import shipping


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/yarn/" in str(item.fspath):
            item.add_marker(pytest.mark.yarn)


@pytest.fixture(scope="session")
def class_data():
    """The class-data archive the client ships for its environment to the TaskExecutors'
    and drivers' Spark JVMs, made first if the client's first submit (in the background)
    has not made it yet."""
    data = SparkClassData.portable(Configuration(), shipping.environment_prefix())
    assert data is not None, "pyspark and a JDK are installed"
    data.ensure()
    return data
