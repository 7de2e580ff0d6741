"""What the app shows: every sentence (explain), every chart (charts, tree_charts), token rendering,
and the experiments behind each page (labs, race, rules, lessons)."""
