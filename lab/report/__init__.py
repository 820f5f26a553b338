"""Showing results: figures (figures, sweep_figures), the HTML report (html) and the one-paragraph answer (answer). Reads what analysis computed; computes nothing new."""
