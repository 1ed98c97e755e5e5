"""The in-graph dynamic programs over tetra-tag scores: the best tree, the k best, marginals,
the chart under span rules (with the constraints that make them) and the tree writer.
"""
