"""The artifact bucket (``HARNESS_ARTIFACT_STORE=s3``) as django-storages' S3 backend
takes it: imported by the settings only when the bucket is chosen, so no other
installation loads boto3."""

from __future__ import annotations

from boto3.s3.transfer import TransferConfig

# Uploads go in parts of 8 MiB, one at a time: boto3's default sends ten at once, each
# held in memory, so storing one large output would take a worker 80 MiB.
PART_BYTES = 8 << 20


def s3_storage(
    *,
    bucket: str,
    prefix: str,
    endpoint_url: str | None,
    region: str | None,
    access_key: str | None,
    secret_key: str | None,
    addressing_style: str,
) -> dict[str, object]:
    """The ``STORAGES["artifacts"]`` entry. Objects are named by their content, so one
    written again is the same bytes (overwritten, never renamed), and nothing is public."""
    return {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": bucket,
            "location": prefix,
            "endpoint_url": endpoint_url,
            "region_name": region,
            "access_key": access_key,
            "secret_key": secret_key,
            "addressing_style": addressing_style,
            "file_overwrite": True,
            "default_acl": None,
            "querystring_auth": True,
            "transfer_config": TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, use_threads=False),
        },
    }
