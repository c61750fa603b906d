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

# r_to_pandas(): documented in man/r_to_pandas.Rd
r_to_pandas <- function(df) {
  need(df, "data.frame", "df", "a data.frame")
  specs <- unname(Map(column_spec, df, names(df)))
  dp_bridge()$make_frame(as.list(names(df)), specs, nrow(df))
}

# pandas_to_r(): documented in man/r_to_pandas.Rd
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
