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
    testthat::skip(paste0("shared case kind '", kind, "' is not run from R yet"))
  )
}
