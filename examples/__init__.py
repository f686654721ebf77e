"""Example kernels: each module defines kernels and a ``run(client)`` that checks them against numpy."""
