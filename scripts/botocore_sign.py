#!/usr/bin/env python3
"""Sign S3 requests with botocore, as an independent check of our signer.

Reads one request per line on stdin: fields separated by spaces, each field
an `x` followed by its hex-encoded UTF-8 (the body: raw bytes), so an empty
field is `x`:

    timestamp method url region access_key secret_key session_token body [name value]...

timestamp is SigV4's YYYYMMDDTHHMMSSZ; an empty session token means none.
Prints the Authorization header botocore's S3SigV4Auth computes, one line per
request. Used by the backends crate's tests (BUCKET_LEASE_PYTHON names the
interpreter with botocore installed).
"""
import datetime
import sys

import botocore.auth
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def sign(fields):
    raw = [bytes.fromhex(f[1:]) for f in fields]
    text = [f.decode() for f in raw[:7]]
    timestamp, method, url, region, access_key, secret_key, token = text
    body = raw[7]
    rest = [f.decode() for f in raw[8:]]
    headers = dict(zip(rest[0::2], rest[1::2]))

    when = datetime.datetime.strptime(timestamp, "%Y%m%dT%H%M%SZ")
    # Pin the clock botocore signs with.
    botocore.auth.get_current_datetime = lambda *a, **k: when

    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    credentials = Credentials(access_key, secret_key, token or None)
    S3SigV4Auth(credentials, "s3", region).add_auth(request)
    return request.headers["Authorization"]


def main():
    for line in sys.stdin:
        fields = line.split()
        if fields:
            print(sign(fields), flush=True)


if __name__ == "__main__":
    main()
