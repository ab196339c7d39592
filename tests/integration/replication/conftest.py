"""The real etcd the etcd contract tests start (skipped when etcd is not installed)."""

from ..etcd.conftest import etcd_endpoint

__all__ = ["etcd_endpoint"]
