"""Predict before you spend GPU hours: fit the emulator's cost model to a few measured configurations
(``lab calibrate``), predict the rest with prediction intervals and rank them (``lab predict``,
``lab sweep --order``). Modules: the cost model's blocks (model), least squares that marks what the
data cannot determine (linfit), what is read from result directories (observe), the fit and its
profile export (fit), the virtual-clock scheduler replay (simulate), predictions (predict), ranking
(order), their report (report) and the command line (cli). Works the same on emulator and SGLang
results; it never reads the emulator's ground truth. docs/calibration.md."""
