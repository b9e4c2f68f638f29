"""The object-store tier: a RemoteStorageManager over S3-compatible (and, through the same
client, GCS and Azure) object storage, in the Aiven tiered-storage plugin's on-bucket format,
so a bucket either writes the other reads.

- `keys`, `manifest`, `custom_metadata`: the format (object keys, `.rsm-manifest`, KIP-917
  custom metadata).
- `transforms`: per-chunk zstd and AES-256-GCM envelope encryption.
"""
