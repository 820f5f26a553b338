"""Import-time stand-in for deep_gemm (bundled by lab.offline, not the real package).

SGLang 0.5.16 uses deep_gemm only inside functions (FP8 GEMMs); the bundle sets
``SGLANG_ENABLE_JIT_DEEPGEMM=0`` so none of them is called. Empty on purpose, as in the
recipe that served (``shared/real-sglang/bundle.sh``): ``hasattr`` probes answer False.
"""
