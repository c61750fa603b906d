# The issue's "must show" items, end to end on the bundled Adult data.
test_that("Adult: load, synthesise with privbayes-e, pool a glm, read the ledger", {
  skip_if_no_engine()
  skip_if_not("privbayes-e" %in% reticulate::py_to_r(dp_py()$available_methods()),
              "engine has no 'privbayes-e' method")
  adult <- dp_dataset("adult")
  expect_identical(nrow(adult), 32561L)
  expect_identical(sum(is.na(adult)), 4262L)
  fac <- names(adult)[vapply(adult, is.factor, NA)]
  expect_true(all(c("workclass", "sex", "race", "income") %in% fac))

  s <- dp_synthesize(adult, method = "privbayes-e", epsilon = 1, m = 3, seed = 1)
  expect_s3_class(s, "dpsynth_synds")
  expect_length(s$syn, 3)
  for (d in s$syn) {
    expect_s3_class(d, "data.frame")
    expect_identical(names(d), names(adult))
    for (col in fac) expect_identical(levels(d[[col]]), levels(adult[[col]]), label = col)
    ints <- vapply(d, is.numeric, NA)
    expect_false(any(vapply(d[ints], function(v) any(v == -2147483648, na.rm = TRUE), NA)))
    expect_false(any(vapply(d[ints], function(v) any(is.nan(v)), NA)))
    # the schema derives education from education-num (levels 1-16 in the same order)
    expect_identical(as.integer(d$education), as.integer(d[["education-num"]]))
  }
  fit <- suppressWarnings(dp_glm(income ~ age + sex + race, family = binomial, data = s))
  tab <- summary(fit)
  expect_true(all(c("term", "estimate", "std.error", "df", "p.value", "conf.low", "conf.high", "fmi")
                  %in% names(tab)))
  expect_identical(tab$term, c("(Intercept)", "age", "sexMale", paste0("race", levels(adult$race)[-1])))
  led <- dp_ledger(s)
  expect_s3_class(led, "data.frame")
  expect_lte(sum(led$epsilon), 1 + 1e-9)
})
