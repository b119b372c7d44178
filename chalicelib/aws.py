"""The configuration of every AWS client the service builds: how long a store request
may take, and how often botocore tries it."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Literal, overload

from botocore.config import Config
from botocore.session import Session, get_session

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient

# The store budget: the service answers 503 within it, inside the client's deadline
# (5 s by default) and the Lambda timeout (5 s). One store call takes at most two
# attempts of connect (0.5 s) + read (1 s), plus botocore's backoff between them (25 ms
# jittered for a timeout; up to 1 s after a throttle, whose answer is fast): a hung store
# gives a 503 after about 2 s, at worst about 3 s (docs/operations.md, "Deadlines").
# The retry inside botocore is safe: the counter store's writes are idempotent per check.
# No client-side parameter validation: the storage adapters build every request from
# typed values, DynamoDB validates it again anyway, and botocore's walk over a
# last-calls list costs about a tenth of a check's client CPU (bench/network.py).
STORE_CONNECT_SECONDS = 0.5
STORE_READ_SECONDS = 1.0
STORE_ATTEMPTS = 2
# The longest one attempt of a store request may take: a check starts a request only if
# this much is left before its deadline. (Its botocore retry, after a timeout, may end up
# to as much again past it: a hang that begins late in a check answers by about 5.5 s;
# one at its first request, the usual case, by about 2 s.)
STORE_STEP_SECONDS = STORE_CONNECT_SECONDS + STORE_READ_SECONDS
CLIENT_CONFIG = Config(
    connect_timeout=STORE_CONNECT_SECONDS,
    read_timeout=STORE_READ_SECONDS,
    retries={"total_max_attempts": STORE_ATTEMPTS, "mode": "standard"},
    max_pool_connections=50,
    parameter_validation=False,
)
# A token look-up tries once: the authorizer and then the route may both look a token up
# while the store hangs, and the two together must still fit the budget above.
TOKEN_CLIENT_CONFIG = CLIENT_CONFIG.merge(
    Config(retries={"total_max_attempts": 1, "mode": "standard"})
)


_SESSION: list[Session] = []
_SESSION_LOCK = threading.Lock()


@overload
def client(service: Literal["dynamodb"], config: Config = CLIENT_CONFIG) -> DynamoDBClient: ...
@overload
def client(service: Literal["sns"], config: Config = CLIENT_CONFIG) -> SNSClient: ...
@overload
def client(service: str, config: Config = CLIENT_CONFIG) -> Any: ...
def client(service: str, config: Config = CLIENT_CONFIG) -> Any:
    """A client for `service` from the container's one botocore session: the client
    `boto3.client` builds (boto3 adds nothing to these services' clients), without
    importing boto3, whose s3transfer and multiprocessing cost a cold start about 12 ms
    (bench/cold_start.py). Region, credentials and endpoint (`AWS_ENDPOINT_URL_*`) come
    from the environment as for boto3."""
    with _SESSION_LOCK:  # a botocore session is not safe to share while it builds
        if not _SESSION:
            _SESSION.append(get_session())
        return _SESSION[0].create_client(service, config=config)
