"""What every part of the lab shares, below all of it: the one user-facing error (``errors``),
the bounded reader of every file and option value (``reading``), the one writer and the output
directory's lock (``io``), names and size bounds (``limits``), the setter of torch's threads
(``threads``), whether the lab's packages are installed (``packages``), and the one look of every
report: a document of blocks rendered to HTML and Markdown (``doc``), tables, CSS and figures
(``render``). Nothing here imports the rest of the lab."""
