"""Advice: what to fix and what it buys (`advise`: rules over the warehouse, each finding's saving
replayed by the what-if, and a causal profile of the path's largest regions), and why one run
is slower than another along the critical path (`diff`)."""
