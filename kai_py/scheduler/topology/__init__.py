"""Topology-aware placement of gangs: reading a job's topology constraint against
the Topology objects (``constraint``), and the domains (racks, blocks...) a gang
may be placed in, fullest first, with the order of nodes inside one (``domains``).
The actions place a gang in the first domain that takes all of it."""
