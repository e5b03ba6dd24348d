"""The networks shipped with gdlbench. Each *.json file here is one net; each module here with a
NETS dict {name: function returning a spec dict} adds nets built by code. A new file is a new
net: the engine (gdlbench.nets.network) discovers them, nothing else changes."""
