"""The privacy core: calibration, noise primitives, the ledger, accountants."""
from .calibration import (cdp_delta, cdp_eps, cdp_rho, gaussian_epsilon, gaussian_sigma, sgm_epsilon,
                          sgm_noise_multiplier, zcdp_gaussian_rho, zcdp_gaussian_sigma)
from .ledger import BudgetExceededError, PrivacyLedger, Spend
from .amplification import mcar_amplification
from .mechanisms import (distance, exponential_mechanism, gaussian_counts, gaussian_values, laplace_counts,
                         laplace_values, record_noise_inputs, replay_noise_outputs)
from .rng import NoiseSource
from .validation import check_delta, check_epsilon, check_seed

__all__ = ["cdp_delta", "cdp_eps", "cdp_rho", "gaussian_epsilon", "gaussian_sigma", "sgm_epsilon",
           "sgm_noise_multiplier", "zcdp_gaussian_rho", "zcdp_gaussian_sigma", "BudgetExceededError",
           "PrivacyLedger", "Spend", "distance", "exponential_mechanism", "gaussian_counts", "gaussian_values",
           "laplace_counts", "laplace_values", "record_noise_inputs", "replay_noise_outputs", "NoiseSource",
           "check_delta", "check_epsilon", "check_seed", "mcar_amplification"]
