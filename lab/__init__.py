"""eagle-verify-lab: does EAGLE-3 speculative decoding help, and why not when it doesn't.

One module per concern (docs/architecture.md). Importing the package only narrows one
third-party warning: inside a papermill kernel, MLflow's and papermill's ``tqdm.auto``
imports warn "IProgress not found" (no ipywidgets); the lab's own bars are plain tqdm.
"""

import warnings

warnings.filterwarnings("ignore", message="IProgress not found")
