"""Issue 18: counting marginals where the data live (pandas, DuckDB, Spark).

Every backend must feed exactly the same counts into the same mechanisms, so the same seed gives
the same synthetic data whatever holds the rows. Spark tests skip without pyspark or Java; their
session is local[1] with one shuffle partition.
"""
import itertools
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.marginals import EncodedRows, count_marginal, count_with_missing, open_table
from dpsynth.marginals.backends import DuckDBTable, FrameTable, SQLRows

duckdb = pytest.importorskip("duckdb")

SCHEMA = dpsynth.Schema.from_dict({
    "grp": {"type": "categorical", "categories": ["a", "b", "it's"]},
    "code": {"type": "categorical", "categories": [0, 1, 2]},          # numbers stored as floats
    "label": {"type": "categorical", "categories": ["1", "2", "x"]},   # text matching numbers
    "x": {"type": "numeric", "lower": 0.0, "upper": 10.0, "bins": 4},  # edges 0, 2.5, 5, 7.5, 10
    "age": {"type": "numeric", "lower": 0, "upper": 99, "bins": [0, 18, 30, 65, 100], "integer": True},
})


def tricky_frame() -> pd.DataFrame:
    """NAs of every kind, numerics outside the bounds (clipped) and exactly on bin edges."""
    rng = np.random.default_rng(0)
    n = 400
    x = rng.uniform(-5, 15, n)
    x[rng.random(n) < 0.15] = np.nan
    x[:12] = [0.0, 2.5, 5.0, 7.5, 10.0, -0.0, 2.4999999, 9.9999, 1e9, -1e9, np.inf, -np.inf]
    age = pd.array(rng.integers(-3, 110, n), dtype="Int64")
    age[rng.random(n) < 0.1] = pd.NA
    age[:6] = [0, 18, 30, 65, 99, 100]
    code = rng.choice([0.0, 1.0, 2.0, np.nan], n)
    grp = pd.Series(rng.choice(["a", "b", "it's", None], n), dtype=object)
    label = pd.Series(rng.choice([1, 2, "x", None], n), dtype=object).map(lambda v: v if v is None else str(v))
    return pd.DataFrame({"grp": grp, "code": code, "label": label, "x": x, "age": age})


@pytest.fixture(scope="module")
def tricky(tmp_path_factory):
    df = tricky_frame()
    path = tmp_path_factory.mktemp("backends") / "tricky.parquet"
    _write_parquet(df, path)
    return df, path


def _write_parquet(df, path):
    con = duckdb.connect()
    con.register("frame", df)
    con.execute(f"COPY (SELECT * FROM frame) TO '{path}' (FORMAT parquet)")
    con.close()


def _all_tables(rows, d):
    """Every 1-way table with its missing cell, every 2- and 3-way table, at two levels."""
    out = [t.tolist() for t in rows.tables([[j] for j in range(d)], missing_cell=True)]
    specs = [list(c) for k in (2, 3) for c in itertools.combinations(range(d), k)]
    specs += [[(3, 1), (0, 0)], [(4, 1), (3, 2)]]
    out += [t.tolist() for t in rows.tables(specs)]
    out.append(rows.n)
    return out


def _reference(df, schema):
    codes = schema.encode(df)
    sizes = schema.domain_sizes
    return codes, sizes


def test_counts_identical_across_backends(tricky):
    """Pandas, DuckDB (path, relation, and counting kept in SQL) give the same available-case
    counts, equal to the array helpers', on data with NAs, clipping and values on bin edges."""
    df, path = tricky
    codes, sizes = _reference(df, SCHEMA)
    d = len(sizes)
    expected = _all_tables(EncodedRows(codes, sizes), d)
    assert expected[0] == count_with_missing(codes, 0, sizes[0]).tolist()
    assert expected[d] == count_marginal(codes, [0, 1], sizes).tolist()
    tables = {
        "pandas": open_table(df),
        "parquet": open_table(str(path)),
        "relation": open_table(duckdb.read_parquet(str(path))),
        "in-SQL": open_table(str(path), max_distinct=0),
    }
    for name, table in tables.items():
        table.validate(SCHEMA)
        rows = table.rows(SCHEMA)
        assert isinstance(rows, SQLRows) == (name == "in-SQL")
        assert _all_tables(rows, d) == expected, name
        assert _all_tables(rows.complete(), d) == _all_tables(EncodedRows(codes, sizes).complete(), d), name
        kept = rows.with_missing_level([0, 1])
        assert _all_tables(kept, d) == _all_tables(EncodedRows(codes, sizes, missing_level=[0, 1]), d), name
    # the clipped extremes and the edges land where Schema.encode puts them
    assert codes[:12, 3].tolist() == [0, 1, 2, 3, 3, 0, 0, 3, 3, 0, 3, 0]
    assert codes[:6, 4].tolist() == [0, 1, 2, 3, 3, 3]


def test_csv_path_reads_like_the_command_line(tmp_path, tricky):
    df, _ = tricky
    path = tmp_path / "tricky.csv"
    out = df.astype({"code": "Int64"})  # as a CSV holds codes ("1", not "1.0", which the CLI refuses too)
    out.to_csv(path, index=False, na_rep="NA")
    codes, sizes = _reference(df, SCHEMA)
    rows = open_table(str(path), SCHEMA).rows(SCHEMA)
    assert _all_tables(rows, len(sizes)) == _all_tables(EncodedRows(codes, sizes), len(sizes))


@pytest.mark.parametrize("method, options", [("independent", {}), ("privbayes-e", {}), ("privbayes", {}),
                                             ("privbayes-e", {"k": 2})])
def test_same_seed_same_synthetic_data_frame_parquet_relation(adult, tmp_path, method, options):
    df, schema = adult
    df = df.iloc[:4000]
    path = tmp_path / "adult.parquet"
    _write_parquet(df, path)
    before = df.copy()
    runs = [dpsynth.synthesize(data, schema, method, 1.0, seed=5, n=300, **options)
            for data in (df, str(path), duckdb.read_parquet(str(path)), open_table(str(path), max_distinct=10))]
    first = runs[0].datasets[0]
    for r in runs[1:]:
        pd.testing.assert_frame_equal(r.datasets[0], first)
        assert r.ledger.to_frame().equals(runs[0].ledger.to_frame())
    pd.testing.assert_frame_equal(df, before)  # the caller's data are not modified


def test_napsu_counts_on_duckdb(tmp_path):
    """NAPSU-MQ's MST selection and measurements (missing as a level) through DuckDB: same
    released counts as from the DataFrame."""
    rng = np.random.default_rng(3)
    n = 300
    df = pd.DataFrame({"a": rng.choice(["u", "v", None], n), "b": rng.choice(["p", "q"], n),
                       "c": rng.choice(["r", "s", "t"], n)})
    schema = dpsynth.Schema.from_dict({"a": {"type": "categorical", "categories": ["u", "v"]},
                                       "b": {"type": "categorical", "categories": ["p", "q"]},
                                       "c": {"type": "categorical", "categories": ["r", "s", "t"]}})
    path = tmp_path / "toy.parquet"
    _write_parquet(df, path)
    from dpsynth.generators.napsu import NAPSUMQ

    fits = [NAPSUMQ(1.0, 1e-6, missing="level", incomplete=["a"], inference="laplace").fit(data, schema, seed=4)
            for data in (df, str(path))]
    assert fits[0].ledger.to_frame().equals(fits[1].ledger.to_frame())
    assert fits[0].selected_queries_ == fits[1].selected_queries_


def test_validation_errors_in_duckdb(tmp_path, tricky):
    df, path = tricky
    with pytest.raises(ValueError, match="no such file"):
        dpsynth.synthesize(str(tmp_path / "absent.parquet"), SCHEMA, "privbayes-e", 1.0)
    with pytest.raises(TypeError, match="Parquet or CSV"):
        dpsynth.synthesize(df.to_numpy(), SCHEMA, "privbayes-e", 1.0)
    (tmp_path / "data.txt").write_text("a\n1\n")
    with pytest.raises(ValueError, match="cannot tell the format"):
        open_table(str(tmp_path / "data.txt"))
    rel = duckdb.read_parquet(str(path))
    with pytest.raises(ValueError, match=r"columns \['grp'\] are missing from the data"):
        SCHEMA.validate(rel.project("code, label, x, age"))
    with pytest.raises(ValueError, match=r"columns \['extra'\] are not in the schema"):
        SCHEMA.validate(rel.project("*, 1 AS extra"))
    with pytest.raises(ValueError, match="column 'grp' has values outside the schema's categories"):
        dpsynth.synthesize(rel.project("'zz' AS grp, code, label, x, age"), SCHEMA, "privbayes-e", 1.0)
    with pytest.raises(ValueError, match="column 'code' has values outside the schema's categories"):
        SCHEMA.validate(rel.project("grp, 7.5 AS code, label, x, age"))
    with pytest.raises(TypeError, match="'x' is numeric in the schema but has type VARCHAR"):
        SCHEMA.validate(rel.project("grp, code, label, CAST(x AS VARCHAR) AS x, age"))
    with pytest.raises(ValueError, match="has no rows"):
        dpsynth.synthesize(rel.filter("1 = 0"), SCHEMA, "independent", 1.0)


def test_row_methods_refuse_a_table_too_large_for_memory(tricky):
    """Generators that train on rows (DP-SGD, column-wise, pMSE) load a path into pandas only when
    it fits ``max_cells_in_memory``, and say what to do otherwise."""
    df, path = tricky
    table = open_table(str(path), max_cells_in_memory=100)
    with pytest.raises(ValueError, match="trains on rows and needs them in memory.*privbayes-e"):
        dpsynth.synthesize(table, SCHEMA, "kamino", 1.0, delta=1e-6)
    loaded = open_table(str(path)).to_pandas(SCHEMA)
    assert len(loaded) == len(df) and list(loaded.columns) == list(df.columns)


def test_privbayes_e_imports_neither_torch_nor_statsmodels():
    """``import dpsynth`` stays light (bench/scale.py times it against pandas), and a PrivBayesE run
    loads neither torch nor statsmodels nor scikit-learn."""
    code = textwrap.dedent("""
        import sys, dpsynth
        heavy = [m for m in ("torch", "statsmodels", "sklearn", "scipy", "duckdb", "pyspark") if m in sys.modules]
        assert not heavy, f"import dpsynth loaded {heavy}"
        df, schema = dpsynth.load_dataset("adult")
        dpsynth.synthesize(df.iloc[:2000], schema, "privbayes-e", 1.0, seed=1)
        heavy = [m for m in ("torch", "statsmodels", "sklearn") if m in sys.modules]
        assert not heavy, heavy
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)


# ---------------------------------------------------------------------- Spark
@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java (apt-get install openjdk-17-jre-headless)")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[1]").appName("dpsynth-tests")
               .config("spark.sql.shuffle.partitions", "1").config("spark.default.parallelism", "1")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "512m").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def test_spark_counts_and_synthetic_data_identical(spark, tricky, adult, tmp_path):
    df, path = tricky
    codes, sizes = _reference(df, SCHEMA)
    sdf = spark.read.parquet(str(path))
    rows = open_table(sdf).rows(SCHEMA)
    assert _all_tables(rows, len(sizes)) == _all_tables(EncodedRows(codes, sizes), len(sizes))
    in_sql = open_table(sdf, max_distinct=0).rows(SCHEMA)
    assert isinstance(in_sql, SQLRows)
    assert [t.tolist() for t in in_sql.tables([[0, 3], [(4, 1), 1]])] == \
        [t.tolist() for t in EncodedRows(codes, sizes).tables([[0, 3], [(4, 1), 1]])]
    with pytest.raises(ValueError, match="column 'grp' has values outside"):
        SCHEMA.validate(sdf.selectExpr("'zz' AS grp", "code", "label", "x", "age"))

    adult_df, schema = adult
    small = adult_df.iloc[:3000]
    apath = tmp_path / "adult.parquet"
    _write_parquet(small, apath)
    a = dpsynth.synthesize(small, schema, "privbayes-e", 1.0, seed=8, n=200).datasets[0]
    b = dpsynth.synthesize(str(apath), schema, "privbayes-e", 1.0, seed=8, n=200).datasets[0]
    c = dpsynth.synthesize(spark.read.parquet(str(apath)), schema, "privbayes-e", 1.0, seed=8, n=200).datasets[0]
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(a, c)


def test_cli_counts_a_csv_in_duckdb_as_pandas_would(tmp_path, adult):
    """``dpsynth synthesize DATA.csv`` with a marginal-based method reads the CSV in DuckDB (same
    missing-value cells, categories as text) and writes what the pandas route would."""
    from dpsynth.cli import main
    from dpsynth.datasets import read_csv

    df, schema = adult
    df.iloc[:3000].to_csv(tmp_path / "d.csv", index=False)
    schema.to_json(tmp_path / "s.json")
    assert main(["synthesize", str(tmp_path / "d.csv"), "--schema", str(tmp_path / "s.json"), "--method",
                 "privbayes-e", "--epsilon", "1", "--seed", "4", "--n", "200", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 0
    expected = dpsynth.synthesize(read_csv(str(tmp_path / "d.csv"), schema), schema, "privbayes-e", 1.0, seed=4,
                                  n=200)
    expected.to_csv(tmp_path / "e")
    assert (tmp_path / "o" / "synthetic_1.csv").read_text() == (tmp_path / "e" / "synthetic_1.csv").read_text()
