skip_if_no_pandas <- function() {
  skip_if_not(pandas_available(), "Python with pandas not found (set RETICULATE_PYTHON)")
}

skip_if_no_engine <- function() {
  skip_if_not(python_available(), "the dpsynth engine is not importable")
}

roundtrip <- function(df) pandas_to_r(r_to_pandas(df))

py_str <- function(x) reticulate::py_to_r(reticulate::import_builtins(convert = FALSE)$str(x))
