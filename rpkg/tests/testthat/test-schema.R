boys_bounds <- list(age = c(0, 22), hgt = c(45, 200), wgt = c(2, 120), bmi = c(10, 35), hc = c(30, 70),
                    tv = c(1, 30))

test_that("mice::boys: dp_schema -> dp_synthesize -> with() -> dp_pool equals Python's fit_pooled", {
  skip_if_no_engine()
  skip_if_not_installed("mice")
  sch <- dp_schema(mice::boys, bounds = boys_bounds)
  res <- dp_synthesize(mice::boys, "privbayes-e", epsilon = 1, m = 5, schema = sch, seed = 1)
  fit <- with(res, lm(wgt ~ age + reg))
  expect_s3_class(fit, "mira")
  expect_length(fit$analyses, 5L)
  # privbayes-e draws all m data sets from one fitted model, from tables that do not link wgt to
  # age and reg: the engine warns about both, and R relays the warnings
  msgs <- character()
  pooled <- withCallingHandlers(dp_pool(fit), warning = function(w) {
    msgs <<- c(msgs, conditionMessage(w))
    invokeRestart("muffleWarning")
  })
  expect_true(any(grepl("ONE fitted noisy model", msgs)))
  tab <- summary(pooled)
  expect_identical(tab$rule[1], "synthetic")

  # the same data sets through Python's fit_pooled (statsmodels), the same pooling policy
  bridge <- reticulate::import("dpsynth.bridge", convert = FALSE)
  frames <- lapply(res$syn, r_to_pandas)
  out <- bridge$call_quietly(dpsynthr:::dp_py()$fit_pooled, frames, "wgt ~ age + reg")
  ref <- pandas_to_r(reticulate::py_get_item(out, 0L)$to_frame())
  ref$term <- sub("reg\\[T\\.(.*)\\]", "reg\\1", sub("^Intercept$", "(Intercept)", ref$term))
  # R's lm drops a factor level absent from a data set; patsy keeps it as an all-zero (aliased)
  # column. Either way that data set does not count for the term, so the tables agree term by term;
  # a level absent from every data set is only in Python's table, with m = 0 and NA.
  expect_true(all(tab$term %in% ref$term))
  expect_true(all(ref$m[!ref$term %in% tab$term] == 0))
  ref <- ref[match(tab$term, ref$term), ]  # patsy also puts the factor's terms first
  for (col in c("estimate", "ubar", "b", "t", "df", "riv", "std.error", "statistic", "p.value",
                "conf.low", "conf.high")) {
    ok <- is.finite(ref[[col]]) | is.finite(tab[[col]])
    expect_lte(max(abs(tab[[col]][ok] - ref[[col]][ok]) / pmax(1, abs(ref[[col]][ok]))), 1e-6, label = col)
  }
  expect_identical(tab$m, as.integer(ref$m))
  expect_identical(tab$fallback, ref$fallback)

  # mice's own pooling accepts the same mira
  expect_s3_class(mice::pool.syn(fit), "mipo")
  expect_s3_class(mice::pool(fit), "mipo")
  expect_output(print(fit), "mira")
  # and the release as a mids: the same fits through mice's with()
  imp_fit <- with(dp_as_mids(res), lm(wgt ~ age + reg))
  expect_equal(summary(mice::pool.syn(imp_fit)), summary(mice::pool.syn(fit)))
})

test_that("dp_schema without bounds names every numeric column and shows the fix; epsilon pays for them", {
  skip_if_no_engine()
  skip_if_not_installed("mice")
  err <- tryCatch(dp_schema(mice::boys), error = conditionMessage)
  for (col in c("age", "hgt", "wgt", "bmi", "hc", "tv")) expect_match(err, col)
  expect_match(err, "dp_schema(data, bounds = list(age = c(lo, hi), hgt = c(lo, hi)", fixed = TRUE)
  expect_match(err, "epsilon = 0.1", fixed = TRUE)

  sch <- dp_schema(mice::boys, epsilon = 0.1, seed = 3)
  expect_s3_class(sch, "dpsynth_schema")
  expect_equal(sch$privacy$epsilon, 0.1)
  expect_match(sch$columns$age$source, "learned under DP")
  expect_match(sch$columns$reg$source, "declared public")
  expect_identical(unlist(sch$columns$reg$categories), levels(mice::boys$reg))
  expect_output(print(sch), "Learned under DP: epsilon = 0.1")

  res <- dp_synthesize(mice::boys, "privbayes-e", epsilon = 1, m = 1, schema = sch, seed = 1)
  led <- dp_ledger(res)
  paid <- led[startsWith(led$step, "schema: "), ]
  expect_identical(nrow(paid), 12L)  # two private quantiles for each of the six numeric columns
  expect_equal(sum(paid$epsilon), 0.1)
  expect_equal(attr(led, "total_epsilon"), 1.1)
  expect_output(print(res), "epsilon = 1.1")
})

test_that("dp_schema reads kinds from R types, declared levels and bounds, and validates its input", {
  skip_if_no_engine()
  d <- data.frame(f = factor(c("a", NA), levels = c("a", "b", "z")), i = c(1L, NA), x = c(0.5, 2),
                  l = c(TRUE, NA), s = c("u", "v"), stringsAsFactors = FALSE)
  before <- d
  sch <- dp_schema(d, bounds = list(i = c(0, 10), x = c(0, 5)), levels = list(s = c("u", "v", "w")),
                   bins = list(x = 4L))
  expect_identical(d, before)
  cols <- sch$columns
  expect_identical(unlist(cols$f$categories), c("a", "b", "z"))
  expect_true(isTRUE(cols$i$integer))
  expect_identical(c(cols$x$lower, cols$x$upper, cols$x$bins), c(0, 5, 4))
  expect_identical(unlist(cols$l$categories), c(FALSE, TRUE))
  expect_identical(unlist(cols$s$categories), c("u", "v", "w"))
  expect_null(sch$privacy)
  expect_error(dp_schema(d, bounds = list(i = c(0, 10))), "numeric columns without bounds: x")
  expect_error(dp_schema(d, bounds = list(i = c(0, 10), x = c(0, 5))), "character columns without categories: s")
  expect_error(dp_schema(d, bounds = list(i = 3, x = c(0, 5)), levels = list(s = "u")), "two numbers")
  expect_error(dp_schema(d, bounds = c(i = 3)), "named list")
  expect_error(dp_schema(list(a = 1)), "data.frame")
  expect_error(dp_schema(d, bounds = list(i = c(0, 10), x = c(0, 5)), epsilon = 1), "needs delta")
  # two rows: no value passes the thresholded histogram's threshold, and the error says what to do
  expect_error(dp_schema(d, bounds = list(i = c(0, 10), x = c(0, 5)), epsilon = 1, delta = 1e-6, seed = 1),
               "frequent enough.*declare its categories")
})

test_that("dp_derived declares a derived column; the engine checks it and never reads it", {
  skip_if_no_engine()
  df <- data.frame(years = c(0.5, 1.5, 2.5, 1.0, 2.2, 0.1), g = factor(c("a", "b", "a", "b", "a", "b")),
                   level = factor(c("low", "low", "high", "low", "high", "low"), levels = c("low", "high")))
  sch <- dp_schema(df, bounds = list(years = c(0, 3)), bins = 3L)
  d <- dp_derived(sch, "level", from = "years", map = c("low", "low", "high"))
  expect_s3_class(d, "dpsynth_schema")
  expect_identical(d$columns$level$derived_from$column, "years")
  expect_output(print(d), "derived from years")
  expect_error(dp_derived(sch, "nope", from = "years"), "not in the schema")
  expect_error(dp_derived(sch, "level", from = "years"), "same number of levels")
  expect_error(dp_derived(sch, "level", from = "years", map = c("low", "mid", "high")), "not categories")
  expect_error(dp_derived(sch, c("level", "g"), from = "years"), "one column name")
  df$level <- factor(rep("high", 6), levels = c("low", "high"))  # contradicts the map: never read
  s <- dp_synthesize(df, "privbayes", epsilon = 1, m = 2, schema = d, seed = 1)
  for (x in s$syn) {
    expect_identical(levels(x$level), c("low", "high"))
    expect_identical(as.character(x$level), ifelse(is.na(x$years), NA, ifelse(x$years >= 2, "high", "low")))
  }
})
