# Column-by-column conversion between R data.frames and pandas DataFrames, both ways through the
# engine's converter dpsynth.bridge (the project's one R <-> pandas converter, also used by its rpy2
# checks). reticulate's own data.frame conversion is never used: in 1.28 it loses NA in integer,
# logical and categorical columns.

dp_bridge <- function() {
  if (is.null(.dp_env$bridge)) {
    dp_py()
    .dp_env$bridge <- reticulate::import("dpsynth.bridge", convert = FALSE)
  }
  .dp_env$bridge
}

# One R column for the engine's converter (dpsynth.bridge.make_column reads its type and class and
# builds the pandas column): values as a Python list (reticulate 1.28 cannot exchange arrays with
# numpy >= 2) with an explicit NA mask, as reticulate turns NA into "NA", -2147483648 or TRUE.
column_spec <- function(x, name) {
  list(name = name, type = typeof(x), class = as.list(class(x)), matrix = !is.null(dim(x)),
       values = as.list(if (is.character(x)) enc2utf8(x) else unclass(x)), mask = as.list(is.na(x)),
       levels = if (is.factor(x)) as.list(enc2utf8(levels(x))), ordered = is.ordered(x))
}

#' Convert between R data.frames and pandas DataFrames
#'
#' `r_to_pandas()` sends a data.frame to Python column by column and
#' `pandas_to_r()` brings a pandas DataFrame back, keeping missing values in
#' every type. Types map as follows: factor (ordered or not, unused levels
#' kept) <-> `Categorical`; integer <-> nullable `Int64`; logical <->
#' nullable `boolean`; double <-> `float64` (NA <-> NaN); character <->
#' `object` (NA <-> `None`); Date <-> `datetime64[ns]` (NA <-> `NaT`).
#' Column names and order are kept, row names are dropped.
#'
#' @param df A data.frame.
#' @param pdf A pandas DataFrame (a reticulate object, usually created with
#'   `convert = FALSE`).
#' @return `r_to_pandas()`: a pandas DataFrame (reticulate object with
#'   `convert = FALSE`). `pandas_to_r()`: a data.frame. A datetime column
#'   with times of day comes back as POSIXct (UTC).
#' @examplesIf dpsynthr:::python_available()
#' df <- data.frame(sex = factor(c("F", NA), levels = c("F", "M", "X")),
#'                  age = c(31L, NA))
#' pdf <- r_to_pandas(df)
#' identical(pandas_to_r(pdf), df)
#' @export
r_to_pandas <- function(df) {
  need(df, "data.frame", "df", "a data.frame")
  specs <- unname(Map(column_spec, df, names(df)))
  dp_bridge()$make_frame(as.list(names(df)), specs, nrow(df))
}

#' @rdname r_to_pandas
#' @export
pandas_to_r <- function(pdf) frame_from_parts(reticulate::py_to_r(dp_bridge()$split_frame(pdf)))

# The bridge's split_frame() pieces (names, n, columns) -> data.frame.
frame_from_parts <- function(parts) {
  cols <- lapply(parts$columns, column_from_parts)
  names(cols) <- as.character(unlist(parts$names))
  structure(cols, class = "data.frame", row.names = .set_row_names(as.integer(parts$n)))
}

column_from_parts <- function(p) {
  if (p$kind == "factor") {
    codes <- as.integer(unlist(p$codes)) + 1L
    codes[codes == 0L] <- NA_integer_
    return(structure(codes, levels = as.character(unlist(p$levels)),
                     class = c(if (isTRUE(p$ordered)) "ordered", "factor")))
  }
  x <- unlist(p$values)
  x <- switch(p$kind, integer = as.integer(x), logical = as.logical(x),
              character = as.character(x), as.numeric(x))
  x[as.logical(unlist(p$mask))] <- NA
  switch(p$kind,
         Date = structure(as.numeric(x), class = "Date"),
         POSIXct = structure(as.numeric(x), class = c("POSIXct", "POSIXt"), tzone = "UTC"),
         x)
}
