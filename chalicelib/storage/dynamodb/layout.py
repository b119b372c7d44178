"""The counters table's item layouts: attribute names and the kinds of `cids` entries.

Session item layout (one item per tenant + session; every attribute aliased in expressions):
    pk           "<tenant>#<session_id>"
    ls           last attempt, epoch ms (the idle clock)
    started      when the current counters started, epoch ms
    expires_at   TTL, epoch s: clean-up only; expiry is enforced by the `ls` condition
    n_<cat>      calls counted in a category
    r_<cat>      a per-session raised limit (admin)
    rx_<cat>     when that raise lapses, epoch ms (absent: it lasts as long as the counters)
    z_<cat>      "<limit>|<check id>": the refusal that first met that limit (one event)
    b_<cat>      refused attempts since the counters started
    l_<cat>      calls counted through leases (granted at once, spent by the client locally)
    g_<cat>      the category's last lease granted, "<check id>|<ms>|<calls>": a return
                 must name exactly it, once (the id a client sends back is not trusted)
    lr           (before leases were kept in g_: the check id of the lease last given back)
                 own retry of a timed-out write included) applies once. One id, not a set,
                 so the item stays small; an older return sent again is still capped by l_
    suspended    present while an administrator has suspended the session (its reason)
    principal    who the agent acts for, when the caller says
    srv          the MCP server's name, when the caller says
    cli          the MCP client, when the caller says: a map of n (name), v (version) and
                 o (OAuth client id), each present when known
    ab_<cat>     when the last allowed call in a category was, epoch ms, once the last
                 calls started again (idle restart): the principal's streak there reads it
    q_<key>      the loop breaker's count of calls under "<tool>|<digest prefix>|<window>"
                 (added by the consume write; past windows' removed by a later one)
    v_<call id> the life of a call counted under a client's call id (kept form):
                 "<p|a>|<replays>|<in progress until, ms>|<check id>|<binding>"; a write
                 that moves it on is conditioned on the exact value it read
    calls, cids  the last calls (compact strings) and their ids: `keep` entries


Budget items (a principal's, the tenant's) share the table and `pk`, `r_<cat>`, `z_<cat>`,
`suspended`, `expires_at`; their own attributes are in `storage.dynamodb.budget_items`.
"""

from __future__ import annotations

PK = "pk"
LAST_SEEN = "ls"
STARTED = "started"
EXPIRES = "expires_at"
CALLS = "calls"
CALL_IDS = "cids"
PRINCIPAL = "principal"
SERVER = "srv"
CLIENT = "cli"
SUSPENDED = "suspended"
ALLOWED_BEFORE_PREFIX = "ab_"  # the last allowed call in a category of earlier last calls
COUNT_PREFIX = "n_"
RAISED_PREFIX = "r_"
RAISED_UNTIL_PREFIX = "rx_"
NOTIFIED_PREFIX = "z_"
REFUSED_PREFIX = "b_"
HELD_PREFIX = "hb_"  # of the refusals, those the MCP side held (vouched for)
LEASED_PREFIX = "l_"
GRANT_PREFIX = "g_"
REPEAT_PREFIX = "q_"
LIFE_PREFIX = "v_"
# Kinds of `cids` entries. A counted call with a client call id is "c:<id>" exactly, so
# that the condition can test it with `contains`; every other entry ends in "|<check id>".
COUNTED_CALL_ID = "c:"  # counted, under the client's call id: what a retry is matched on
COUNTED_CHECK = "s:"  # counted, no client call id: "s:<check id>"
BLOCKED = "b:"  # refused: "b:<call id or empty>|<check id>"
REPLAYED = "d:"  # a client's retry answered from the original: "d:<call id>|<check id>"
UNCOUNTED = "u:"  # a counted call taken back (a wider budget refused it): as BLOCKED
_SEP = "|"

BUDGET_COUNT_PREFIX = "c_"  # a budget's calls counted in a category, current window
BUDGET_WINDOW_PREFIX = "w_"  # when that window started, epoch ms
WRITER_PREFIX = "wq_"  # a budget's writer's last write number (`quota.writes`)
STREAK_PREFIX = "rf_"  # a principal's refusals in a row in a category
LAST_REFUSAL_PREFIX = "rl_"  # when a principal was last refused in a category, epoch ms
