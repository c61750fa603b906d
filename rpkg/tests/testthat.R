library(testthat)
library(dpsynthr)

test_check("dpsynthr")
