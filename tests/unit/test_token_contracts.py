"""What tokens promise beyond one process: the key id derived from a bare secret is the same on
every replica and every version (a rolling upgrade verifies the tokens the old version minted),
and a refused caller reads which token it needs."""

from __future__ import annotations

import hashlib

from ledger import tokens


def test_the_key_id_of_a_bare_secret_is_fixed_across_replicas_and_versions() -> None:
    """`h` and the first 8 hex digits of the secret's SHA-256: a replica (or the next version) that
    derived it otherwise would refuse every token minted with the same secret."""
    assert (
        tokens.derived_kid("a-bare-secret-of-some-length")
        == "h" + (hashlib.sha256(b"a-bare-secret-of-some-length").hexdigest()[:8])
    )
    assert tokens.derived_kid("a-bare-secret-of-some-length") == "h05ae811f"


def test_a_read_token_refused_a_write_is_told_which_token_it_needs() -> None:
    """The refusal is what the 403 says to a person: the scope's limit, then the tokens that may."""
    read = tokens.Grant(scope=tokens.Scope.READ, expires_at_s=None, kid="k")
    write_any = tokens.Need(read=False)
    assert tokens.refusal(read, write_any) == (
        "a read token may only read; this request needs an admin token"
    )
