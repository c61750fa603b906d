"""The privacy core: calibration, noise primitives, the ledger, accountants."""
from .calibration import (cdp_delta, cdp_eps, cdp_rho, gaussian_epsilon, gaussian_sigma, sgm_epsilon,
                          sgm_noise_multiplier, zcdp_gaussian_rho, zcdp_gaussian_sigma)
from .amplification import mcar_amplification, mcar_amplification_ex_ante
from .ledger import BudgetExceededError, PrivacyLedger, Spend
from .mechanisms import (distance, exponential_mechanism, gaussian_counts, gaussian_values, laplace_counts,
                         laplace_values, observe_noise_input, record_noise_inputs, release_noise_output,
                         replay_noise_outputs)
from .dpsgd_accounting import DPSGD_MECHANISM, SGMPlan, poisson_indices
from .rng import NoiseSource
from .validation import RELATIONS, check_delta, check_epsilon, check_seed

__all__ = ["cdp_delta", "cdp_eps", "cdp_rho", "gaussian_epsilon", "gaussian_sigma", "sgm_epsilon",
           "sgm_noise_multiplier", "zcdp_gaussian_rho", "zcdp_gaussian_sigma", "BudgetExceededError",
           "PrivacyLedger", "Spend", "distance", "exponential_mechanism", "gaussian_counts", "gaussian_values",
           "laplace_counts", "laplace_values", "observe_noise_input", "release_noise_output", "record_noise_inputs",
           "replay_noise_outputs", "DPSGD_MECHANISM", "SGMPlan", "poisson_indices", "NoiseSource", "RELATIONS",
           "check_delta", "check_epsilon", "check_seed", "mcar_amplification", "mcar_amplification_ex_ante"]
