toy <- function() {
  data.frame(sex = factor(c("F", "M", NA, "F", "M", "F"), levels = c("F", "M", "X")),
             age = c(30, 41, 52, NA, 25, 67))
}
toy_schema <- list(sex = list(type = "categorical", categories = c("F", "M", "X")),
                   age = list(type = "numeric", lower = 18, upper = 90, bins = 8, missing = TRUE))

fake_synds <- function() {
  ledger <- structure(data.frame(step = "counts", mechanism = "gaussian", epsilon = 1, delta = 1e-6,
                                 rho = NA_real_, sensitivity = 1, relation = "add/remove"),
                      total_epsilon = 1, total_delta = 1e-6, class = c("dpsynth_ledger", "data.frame"))
  structure(list(syn = list(toy(), toy()), m = 2L, method = "independent",
                 call = quote(dp_synthesize(data = toy(), method = "independent", epsilon = 1)),
                 epsilon = 1, delta = NULL, seed = 1, ledger = ledger),
            class = "dpsynth_synds")
}

test_that("a dpsynth_synds object prints, summarises and survives saveRDS", {
  s <- fake_synds()
  expect_output(print(s), "Number of synthesised data sets: \\(\\$m\\) 2")
  expect_output(print(s), "epsilon = 1")
  expect_output(print(summary(s, msel = 1:2)), "Synthetic data set 2")
  expect_output(print(dp_ledger(s)), "Total \\(composed by the engine\\): epsilon = 1")
  f <- tempfile(fileext = ".rds")
  saveRDS(s, f)
  expect_identical(readRDS(f), s)
  expect_error(dp_ledger(list()), "dpsynth_synds")
})

test_that("dp_synthesize needs a schema", {
  expect_error(dp_synthesize(toy(), "independent", epsilon = 1), "public schema")
})

test_that("an R schema list reaches Python intact (one-category lists stay lists)", {
  skip_if_no_engine()
  sch <- c(toy_schema, list(one = list(type = "categorical", categories = "only")))
  back <- py_r(schema_to_py(sch)$to_dict())
  expect_equal(unlist(back$columns$one$categories), "only")
  expect_equal(unlist(back$columns$sex$categories), c("F", "M", "X"))
  expect_equal(back$columns$age$upper, 90)
  expect_identical(py_r(schema_to_py(back)$to_dict()), back)
})

test_that("dp_synthesize returns a plain R dpsynth_synds that survives saveRDS", {
  skip_if_no_engine()
  methods <- reticulate::py_to_r(dp_py()$available_methods())
  skip_if_not("independent" %in% methods, "engine has no 'independent' method")
  d <- toy()
  s <- dp_synthesize(d, "independent", epsilon = 1, m = 2, seed = 3, schema = toy_schema)
  expect_s3_class(s, "dpsynth_synds")
  expect_length(s$syn, 2)
  expect_identical(names(s$syn[[1]]), names(d))
  expect_identical(levels(s$syn[[2]]$sex), levels(d$sex))
  expect_type(s$syn[[1]]$age, "double")
  expect_identical(d, toy())
  led <- dp_ledger(s)
  expect_s3_class(led, "data.frame")
  expect_true(all(c("step", "mechanism", "epsilon", "delta", "rho", "sensitivity", "relation") %in% names(led)))
  expect_lte(attr(led, "total_epsilon"), 1 + 1e-9)
  expect_output(print(s), "Method: \\(\\$method\\) independent")
  f <- tempfile(fileext = ".rds")
  saveRDS(s, f)
  expect_identical(readRDS(f), s)
  again <- dp_synthesize(d, "independent", epsilon = 1, m = 2, seed = 3, schema = toy_schema)
  expect_identical(again$syn, s$syn)
})

test_that("dp_dataset attaches the public schema", {
  skip_if_no_engine()
  folder <- reticulate::py_to_r(dp_py()$datasets$data_dir()$`__str__`())
  skip_if_not(file.exists(file.path(folder, "adult", "schema.json")), "adult data not bundled yet")
  adult <- dp_dataset("adult")
  sch <- attr(adult, "dp_schema")
  expect_s3_class(adult, "data.frame")
  expect_setequal(names(sch$columns), names(adult))
  cats <- Filter(function(col) identical(col$type, "categorical"), sch$columns)
  for (name in names(cats)) {
    expect_s3_class(adult[[name]], "factor")
    expect_identical(levels(adult[[name]]), as.character(unlist(cats[[name]]$categories)))
  }
  expect_gt(sum(is.na(adult)), 0)
})

test_that("dp_diagnostics reports the noise-aware sampler's R-hat and ESS", {
  skip_if_no_engine()
  set.seed(4)
  d <- data.frame(sex = factor(sample(c("F", "M"), 300, TRUE), levels = c("F", "M", "X")),
                  age = round(runif(300, 18, 90)))
  d$age[1:20] <- NA
  s <- dp_synthesize(d, "napsu-mq", epsilon = 2, delta = 1e-6, m = 3, seed = 2, schema = toy_schema)
  diag <- dp_diagnostics(s)
  expect_s3_class(diag, "data.frame")
  expect_identical(names(diag), c("diagnostic", "value"))
  expect_true(all(c("inference", "rhat_max_cells", "ess_bulk_min_cells") %in% diag$diagnostic))
  expect_identical(diag$value[diag$diagnostic == "inference"], "hmc")
  rhat <- s$diagnostics$rhat_max_cells
  expect_true(is.numeric(rhat) && rhat >= 1 && rhat < 10)
  expect_output(print(s), "split R-hat of the cells' probabilities")
  # the data sets have size_ratio x n-hat rows; the released n-hat is the fallback's n_orig
  expect_true(is.numeric(s$n_private) && abs(s$n_private - 300) < 60)
  expect_identical(nrow(s$syn[[1]]), as.integer(round(4 * s$n_private)))
  expect_identical(dp_lm(age ~ sex, data = s)$n_orig, s$n_private)
  expect_identical(dp_pool(with(s, lm(age ~ sex)))$n_orig, s$n_private)
  plain <- dp_synthesize(d, "independent", epsilon = 1, m = 1, seed = 3, schema = toy_schema)
  expect_identical(nrow(dp_diagnostics(plain)), 0L)
  expect_error(dp_diagnostics(list()), "dpsynth_synds")
})

test_that("dp_progress turns the engine's progress reports on and off", {
  skip_if_no_engine()
  on.exit(dp_progress(FALSE))
  expect_true(withVisible(dp_progress(TRUE))$value)
  expect_true(reticulate::py_to_r(dp_py()$progress$`_ENABLED`))
  dp_progress(FALSE)
  expect_false(reticulate::py_to_r(dp_py()$progress$`_ENABLED`))
  expect_error(dp_progress(NA), "TRUE or FALSE")
  expect_error(dp_progress("yes"), "TRUE or FALSE")
})

test_that("napsu-mq's selection_penalty (default TRUE) reaches MST from R (its ledger notes say so)", {
  skip_if_no_engine()
  set.seed(4)
  d <- data.frame(sex = factor(sample(c("F", "M"), 400, TRUE)), reg = factor(sample(letters[1:6], 400, TRUE)),
                  grp = factor(sample(c("u", "v", "w"), 400, TRUE)))
  sch <- list(sex = list(type = "categorical", categories = c("F", "M")),
              reg = list(type = "categorical", categories = letters[1:6]),
              grp = list(type = "categorical", categories = c("u", "v", "w")))
  s <- suppressWarnings(dp_synthesize(d, "napsu-mq", epsilon = 2, delta = 1e-6, m = 1, seed = 2, schema = sch,
                                      selection_penalty = TRUE))
  edges <- s$ledger[grepl("edge", s$ledger$step), ]
  expect_equal(nrow(edges), 2L)
  expect_true(all(grepl("less the noise", edges$note)))
  off <- suppressWarnings(dp_synthesize(d, "napsu-mq", epsilon = 2, delta = 1e-6, m = 1, seed = 2, schema = sch,
                                        selection_penalty = FALSE))
  expect_false(any(grepl("less the noise", off$ledger$note)))
})
