"""cubepy_layouts: Layout types written in the cubepy DSL (issue 5 builds them: views, std and conv layouts).

Nothing is here yet; ``cubepy demo`` falls back to the example kernels until ``cubepy_layouts.demo`` exists.
"""
