"""The modules of scripts/helm-check.py (the Helm chart check): common facts, the value sets, rendering and
schema validation, the chart's promises, and starting epp with a rendered pod's arguments."""
