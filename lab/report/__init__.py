"""Showing results: figures (figures, sweep_figures), one mode's table (tables), the HTML report (html) and the one-paragraph answer (answer). Reads what analysis computed; computes nothing new."""
