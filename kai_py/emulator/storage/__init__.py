"""The emulated API server's storage: objects, resourceVersions and watches
(``store``, ``watch``), patches, selectors, CRD schemas (defaulting, pruning,
validation), built-in validation, version conversion, the registry of what is
served and the API errors. It knows nothing of HTTP.
"""
