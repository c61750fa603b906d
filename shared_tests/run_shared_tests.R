# Runs the language-neutral cases in shared_tests/cases/*.json from R, through
# dpsynthr and reticulate, so the R and Python sides cannot drift apart.
# Sourced by rpkg/tests/testthat/test-shared.R; needs testthat, jsonlite and
# an installed dpsynthr whose Python can import dpsynth.
#
#   run_shared_case(kind, case)   one case (a list from jsonlite, simplifyVector = FALSE)
#   shared_case_files(dir)        the case files of a shared_tests/ directory

shared_case_files <- function(dir) {
  sort(list.files(file.path(dir, "cases"), pattern = "\\.json$", full.names = TRUE))
}

read_shared_cases <- function(file) jsonlite::fromJSON(file, simplifyVector = FALSE)

# JSON null -> NA, then one atomic vector.
shared_values <- function(x) unlist(lapply(x, function(v) if (is.null(v)) NA else v))

# A data.frame from the case's `data` (column -> list, null = NA). With
# `factors = TRUE`: factors with the schema's categories for categorical
# columns, doubles for numeric ones (how an R user holds the data). With
# `factors = FALSE`: the raw values (character or double), as pytest does.
shared_frame <- function(data, schema, factors = TRUE) {
  cols <- if (is.list(schema[["columns"]])) schema[["columns"]] else schema
  out <- lapply(names(data), function(name) {
    v <- shared_values(data[[name]])
    spec <- cols[[name]]
    if (factors && !is.null(spec) && identical(spec$type, "categorical")) {
      factor(as.character(v), levels = as.character(unlist(spec$categories)),
             ordered = isTRUE(spec$ordered))
    } else if (is.character(v)) {
      v
    } else {
      as.numeric(v)
    }
  })
  names(out) <- names(data)
  as.data.frame(out, stringsAsFactors = FALSE, optional = TRUE)
}

shared_schema_py <- function(schema) {
  json <- reticulate::import("json", convert = FALSE)
  txt <- as.character(jsonlite::toJSON(schema, auto_unbox = TRUE, null = "null", digits = NA))
  dpsynthr:::dp_py()$Schema$from_dict(json$loads(txt))
}

# Python float -> R double (also for numpy scalars, which reticulate 1.28
# cannot convert with numpy >= 2).
shared_number <- function(x) reticulate::py_to_r(reticulate::import_builtins(convert = FALSE)$float(x))

# Absolute tolerance, as pytest.approx(abs = tol) on the Python side.
expect_close <- function(actual, expected, tol) {
  testthat::expect_lte(abs(actual - expected), tol,
                       label = sprintf("|%.8g - %.8g|", actual, expected))
}

run_shared_case <- function(kind, case) {
  input <- case$input
  expected <- case$expected
  tol <- if (is.null(case$tol)) 1e-6 else case$tol
  privacy <- function() dpsynthr:::dp_py()$privacy
  switch(kind,
    gaussian_sigma = expect_close(
      shared_number(privacy()$gaussian_sigma(input$epsilon, input$delta, input$sensitivity)),
      expected$sigma, tol),
    cdp_rho = expect_close(shared_number(privacy()$cdp_rho(input$epsilon, input$delta)), expected$rho, tol),
    cdp_eps = expect_close(shared_number(privacy()$cdp_eps(input$rho, input$delta)), expected$epsilon, tol),
    schema_error = {
      reticulate::py_clear_last_error()
      raised <- tryCatch({
        schema <- shared_schema_py(input$schema)
        schema$validate(dpsynthr::r_to_pandas(shared_frame(input$data, input$schema, factors = FALSE)))
        FALSE
      }, error = function(e) TRUE)
      last <- reticulate::py_last_error()
      testthat::expect_true(raised && !is.null(last), label = "a Python error was raised")
      if (raised && !is.null(last)) {
        testthat::expect_identical(last$type, expected$error)
        testthat::expect_match(last$value, expected$match, perl = TRUE)
      }
    },
    congeniality = {
      # through the R formula, as dp_glm() sees it
      f <- dpsynthr:::formula_string(stats::as.formula(input$formula))
      got <- unlist(reticulate::py_to_r(dpsynthr:::dp_py()$analyses$congeniality_messages(
        f, as.list(shared_values(input$columns)), lapply(input$queries, function(q) as.list(shared_values(q))))))
      want <- as.character(shared_values(expected$missing))
      testthat::expect_length(got, length(want))
      for (i in seq_along(want)) testthat::expect_true(startsWith(got[i], want[i]), label = got[i])
    },
    roundtrip = {
      df <- shared_frame(input$data, input$schema)
      pdf <- dpsynthr::r_to_pandas(df)
      testthat::expect_identical(dpsynthr::pandas_to_r(pdf), df)
      schema <- shared_schema_py(input$schema)
      testthat::expect_null(reticulate::py_to_r(schema$validate(pdf)))
      if (!is.null(expected$codes)) {
        codes <- reticulate::py_to_r(schema$encode(pdf)$tolist())
        testthat::expect_identical(lapply(codes, as.integer),
                                   lapply(expected$codes, function(row) as.integer(unlist(row))))
      }
    },
    pool = run_pool_case(case, tol),
    schema_from_data = run_schema_from_data_case(case),
    testthat::skip(paste0("shared case kind '", kind, "' is not run from R yet"))
  )
}

# ---- kind "pool": dpsynth.pool through reticulate, and mice::pool.scalar where the rule exists ----

# A Python dict of plain values (convert = FALSE; DataFrame.to_dict gives Python floats, not
# numpy scalars) -> named R list of vectors.
shared_py_list <- function(x) reticulate::py_to_r(x)

# Compare one column: expected JSON null = NA/NaN, logical and character exactly, numbers with tol.
expect_pool_column <- function(got, want, tol, label) {
  testthat::expect_length(got, length(want))
  for (i in seq_along(want)) {
    w <- want[[i]]
    g <- got[[i]]
    if (is.null(w)) {
      testthat::expect_true(is.na(g), label = sprintf("%s[%d] is NaN", label, i))
    } else if (is.logical(w) || is.character(w)) {
      testthat::expect_identical(g, w, label = sprintf("%s[%d]", label, i))
    } else {
      expect_close(as.numeric(g), as.numeric(w), tol)
    }
  }
}

run_pool_case <- function(case, tol) {
  input <- case$input
  expected <- case$expected
  py <- dpsynthr:::dp_py()
  # Lists travel as Python lists (reticulate 1.28 cannot pass numpy arrays with numpy >= 2).
  table <- py$pool(input$estimates, input$variances, rule = input$rule, dfcom = input$dfcom,
                   n_syn = input$n_syn, n_orig = input$n_orig, terms = input$terms)
  got <- shared_py_list(table$to_dict("list"))
  for (col in names(expected)) {
    expect_pool_column(got[[col]], expected[[col]], tol, col)
  }
  if (!is.null(case$mice)) {
    # The same numbers straight from mice, term by term.
    n <- as.numeric(case$mice$n)
    p <- length(expected$term)
    for (j in seq_len(p)) {
      Q <- vapply(input$estimates, function(q) as.numeric(if (p == 1) q else q[[j]]), 0)
      U <- vapply(input$variances, function(u) as.numeric(if (p == 1) u else u[[j]][[j]]), 0)
      ref <- mice::pool.scalar(Q, U, n = n, k = case$mice$k, rule = case$mice$rule)
      expect_close(got$estimate[[j]], ref$qbar, tol)
      expect_close(got$ubar[[j]], ref$ubar, tol)
      expect_close(got$b[[j]], ref$b, tol)
      expect_close(got$t[[j]], ref$t, tol)
      expect_close(got$df[[j]], ref$df, tol)
      expect_close(got$riv[[j]], ref$r, tol)
      if (is.na(ref$fmi)) testthat::expect_true(is.na(got$fmi[[j]])) else expect_close(got$fmi[[j]], ref$fmi, tol)
    }
  }
  if (!is.null(case$wald)) {
    want <- case$wald
    res <- shared_py_list(py$inference$wald_test(input$estimates, input$variances, rule = input$rule,
                                                 terms = want$terms, names = input$terms,
                                                 dfcom = input$dfcom))
    for (key in c("statistic", "df1", "df2", "p.value", "riv")) expect_close(res[[key]], want[[key]], tol)
  }
}

# ---- kind "schema_from_data": dpsynthr::dp_schema on the data.frame an R user would hold ----

shared_typed_frame <- function(data, types) {
  out <- lapply(names(data), function(name) {
    v <- shared_values(data[[name]])
    spec <- types[[name]]
    switch(spec$type,
           factor = factor(as.character(v), levels = as.character(unlist(spec$levels))),
           integer = as.integer(v), double = as.numeric(v), logical = as.logical(v),
           as.character(v))
  })
  names(out) <- names(data)
  as.data.frame(out, stringsAsFactors = FALSE, optional = TRUE)
}

run_schema_from_data_case <- function(case) {
  input <- case$input
  expected <- case$expected
  df <- shared_typed_frame(input$data, input$types)
  args <- list(df, bounds = lapply(input$bounds, as.numeric), levels = lapply(input$levels, unlist),
               bins = if (!is.null(input$bins)) as.integer(input$bins) else 16L,
               epsilon = input$epsilon, delta = input$delta, seed = input$seed)
  if (!is.null(expected$error)) {
    msg <- tryCatch({ do.call(dpsynthr::dp_schema, args); "" }, error = conditionMessage)
    for (name in unlist(expected$names)) testthat::expect_match(msg, name, fixed = TRUE)
    testthat::expect_match(msg, expected$match, perl = TRUE)
    return(invisible())
  }
  got <- do.call(dpsynthr::dp_schema, args)
  for (name in names(expected$columns)) {
    col <- got$columns[[name]]
    col$source <- NULL
    testthat::expect_equal(col, expected$columns[[name]], label = name)
  }
  if (!is.null(expected$privacy)) {
    expect_close(got$privacy$epsilon, expected$privacy$epsilon, 1e-9)
    expect_close(got$privacy$delta, expected$privacy$delta, 1e-12)
    testthat::expect_length(got$privacy$spends, expected$privacy$spends)
  } else {
    testthat::expect_null(got$privacy)
  }
}
