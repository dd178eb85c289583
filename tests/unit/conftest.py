import pytest

from flinkyarn.spark import class_data


@pytest.fixture
def spark_home(monkeypatch, tmp_path):
    """A Spark home of two jars and a JDK of one file, in place of the real ones."""
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (home / "jars" / name).write_bytes(b"jar " + name.encode())
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    for name in class_data.CLASS_PATH_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def no_trainers(request, monkeypatch):
    """No unit test but those of the class-data archive itself starts a trainer of the Spark JVM's
    class-data archive (a JVM for a minute) by asking for its options."""
    if request.module.__name__.endswith("test_spark_cds"):
        return
    monkeypatch.setattr(class_data.SparkClassData, "train_in_background", lambda self: False)
