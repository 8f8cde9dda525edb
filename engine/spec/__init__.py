"""The spec: YAML → a typed, located, registry-resolved `Spec`; reads no dataset."""
