test_that("factors keep levels (unused too), order and NA as pandas Categorical", {
  skip_if_no_pandas()
  df <- data.frame(f = factor(c("a", NA, "b"), levels = c("b", "a", "unused")))
  pdf <- r_to_pandas(df)
  expect_equal(py_str(pdf$f$dtype), "category")
  expect_equal(reticulate::py_to_r(pdf$f$cat$categories$tolist()), c("b", "a", "unused"))
  expect_equal(reticulate::py_to_r(pdf$f$cat$codes$tolist()), c(1L, -1L, 0L))
  expect_false(reticulate::py_to_r(pdf$f$cat$ordered))
  expect_identical(pandas_to_r(pdf), df)
})

test_that("ordered factors stay ordered", {
  skip_if_no_pandas()
  df <- data.frame(o = factor(c("lo", NA, "hi"), levels = c("lo", "mid", "hi"), ordered = TRUE))
  pdf <- r_to_pandas(df)
  expect_true(reticulate::py_to_r(pdf$o$cat$ordered))
  expect_identical(pandas_to_r(pdf), df)
})

test_that("integer NA becomes pandas Int64 <NA>, never -2147483648", {
  skip_if_no_pandas()
  df <- data.frame(i = c(1L, NA, -3L))
  pdf <- r_to_pandas(df)
  expect_equal(py_str(pdf$i$dtype), "Int64")
  expect_equal(reticulate::py_to_r(pdf$i$isna()$tolist()), c(FALSE, TRUE, FALSE))
  expect_equal(py_str(pdf$i$tolist()), "[1, <NA>, -3]")
  expect_identical(roundtrip(df), df)
})

test_that("logical NA becomes pandas boolean <NA>", {
  skip_if_no_pandas()
  df <- data.frame(l = c(TRUE, NA, FALSE))
  pdf <- r_to_pandas(df)
  expect_equal(py_str(pdf$l$dtype), "boolean")
  expect_equal(reticulate::py_to_r(pdf$l$isna()$tolist()), c(FALSE, TRUE, FALSE))
  expect_identical(roundtrip(df), df)
})

test_that("double NA becomes NaN and comes back as NA", {
  skip_if_no_pandas()
  df <- data.frame(d = c(1.5, NA, -Inf, 1e300))
  pdf <- r_to_pandas(df)
  expect_equal(py_str(pdf$d$dtype), "float64")
  expect_identical(roundtrip(df), df)
  expect_identical(roundtrip(data.frame(d = NaN))$d, NA_real_)
})

test_that("character NA becomes None in an object column", {
  skip_if_no_pandas()
  df <- data.frame(ch = c("x", NA, "\u00e9", ""), stringsAsFactors = FALSE)
  pdf <- r_to_pandas(df)
  expect_equal(py_str(pdf$ch$dtype), "object")
  expect_equal(py_str(pdf$ch$tolist()), "['x', None, '\u00e9', '']")
  expect_identical(roundtrip(df), df)
})

test_that("Dates become datetime64[ns] with NaT for NA", {
  skip_if_no_pandas()
  df <- data.frame(dt = as.Date(c("2020-02-29", NA, "1901-01-01")))
  pdf <- r_to_pandas(df)
  expect_equal(py_str(pdf$dt$dtype), "datetime64[ns]")
  expect_equal(py_str(pdf$dt$astype("str")$tolist()), "['2020-02-29', 'NaT', '1901-01-01']")
  expect_identical(roundtrip(df), df)
})

test_that("pandas datetimes with a time of day come back as POSIXct (UTC)", {
  skip_if_no_pandas()
  pd <- reticulate::import("pandas", convert = FALSE)
  pdf <- pd$DataFrame(reticulate::dict(t = pd$to_datetime(list("2021-03-04 05:06:07", NULL))))
  out <- pandas_to_r(pdf)
  expect_s3_class(out$t, "POSIXct")
  expect_equal(format(out$t, "%Y-%m-%d %H:%M:%S", tz = "UTC"), c("2021-03-04 05:06:07", NA))
})

test_that("names and order are kept, row names dropped", {
  skip_if_no_pandas()
  df <- data.frame(`b c` = 1:3, a = c("x", "y", "z"), check.names = FALSE,
                   row.names = c("r1", "r2", "r3"), stringsAsFactors = FALSE)
  out <- roundtrip(df)
  expect_identical(names(out), c("b c", "a"))
  expect_identical(attr(out, "row.names"), 1:3)
  rownames(df) <- NULL
  expect_identical(out, df)
})

test_that("0-row and 1-row frames work for every type", {
  skip_if_no_pandas()
  df <- data.frame(f = factor(c("a", NA), levels = c("a", "b")),
                   o = factor(c("x", "y"), levels = c("y", "x"), ordered = TRUE),
                   i = c(NA, 2L), l = c(NA, TRUE), d = c(NA, 0.5), ch = c(NA, "q"),
                   dt = as.Date(c(NA, "2000-01-01")), stringsAsFactors = FALSE)
  zero <- df[0, ]
  expect_equal(reticulate::import_builtins()$len(r_to_pandas(zero)), 0L)
  expect_identical(roundtrip(zero), zero)
  one <- df[1, ]
  rownames(one) <- NULL
  expect_identical(roundtrip(one), one)
  expect_identical(roundtrip(df), df)
})

test_that("all-NA columns keep their type", {
  skip_if_no_pandas()
  df <- data.frame(i = c(NA_integer_, NA), l = c(NA, NA), d = c(NA_real_, NA),
                   ch = c(NA_character_, NA), f = factor(c(NA, NA), levels = "a"),
                   stringsAsFactors = FALSE)
  expect_identical(roundtrip(df), df)
})

test_that("pandas-made columns (int64, float NaN, string, Categorical with None) convert", {
  skip_if_no_pandas()
  pd <- reticulate::import("pandas", convert = FALSE)
  pdf <- reticulate::py_eval(paste0(
    "__import__('pandas').DataFrame({'n': [1, 2], 'x': [0.5, float('nan')],",
    " 's': __import__('pandas').array(['u', None], dtype='string'),",
    " 'c': __import__('pandas').Categorical(['p', None], categories=['q', 'p'])})"), convert = FALSE)
  out <- pandas_to_r(pdf)
  expect_identical(out, data.frame(n = 1:2, x = c(0.5, NA), s = c("u", NA),
                                   c = factor(c("p", NA), levels = c("q", "p")),
                                   stringsAsFactors = FALSE))
})

test_that("unsupported columns give a clear error", {
  expect_error(r_to_pandas(data.frame(z = complex(real = 1, imaginary = 1))), "cannot send")
  expect_error(r_to_pandas(list(a = 1)), "data.frame")
})

test_that("synthetic columns in the schema's dtypes (Int64, category, float64) come back with NA", {
  skip_if_no_pandas()
  dp <- dpsynthr:::dp_py()
  schema <- dp$Schema$from_dict(list(
    g = list(type = "categorical", categories = list("b", "a")),
    n = list(type = "numeric", lower = 0, upper = 9, integer = TRUE),
    x = list(type = "numeric", lower = 0, upper = 1)))
  raw <- r_to_pandas(data.frame(g = c("a", NA, "b"), n = c(1, NA, 3), x = c(0.5, NA, 1)))
  pdf <- reticulate::import("dpsynth.schema", convert = FALSE)$cast_to_schema(raw, schema)
  expect_equal(py_str(pdf$n$dtype), "Int64")
  out <- pandas_to_r(pdf)
  expect_identical(out$g, factor(c("a", NA, "b"), levels = c("b", "a")))
  expect_identical(out$n, c(1L, NA, 3L))
  expect_identical(out$x, c(0.5, NA, 1))
})
