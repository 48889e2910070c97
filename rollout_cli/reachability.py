"""The words of the client commands when a service cannot be reached or a token may not be sent,
and for what the services and the client library say in the library's words.

Shared by the ``rollout`` commands, ``rollout import`` and ``rollout loadtest`` so
all three tell the same things apart: nothing listening, a TLS service reached
without (or with the wrong) CA file, a token that would cross a network in clear
text (README "Production").
"""

from __future__ import annotations

from shared.remedies import FORCED_RESUME, SEE_VERIFY

#: Each phrase of :mod:`shared.remedies` as the command line says it.
COMMAND_WORDS = {
    FORCED_RESUME: "rollout resume --force",
    SEE_VERIFY: "see rollout verify",
}


def unreachable_message(service: str, address: str, detail: str = "", *, tls_ca_given: bool = False) -> str:
    """One line saying what to do when the ``service`` ("writer"/"reader") at ``address`` does not
    answer. ``detail`` is gRPC's own reason: a failed TLS handshake (a CA file that did not sign
    the service's certificate) reads differently from no service at all."""
    if "WRONG_VERSION_NUMBER" in detail:  # a TLS hello answered by something that is not TLS
        return (
            f"the {service} at {address} does not speak TLS: drop --tls-ca / ROLLOUT_TLS_CA to reach it"
            " in plaintext, or point at the address where it serves TLS."
        )
    if "handshake" in detail.lower():
        return (
            f"the TLS handshake with the {service} at {address} failed: its certificate is not signed by"
            " the CA file given with --tls-ca / ROLLOUT_TLS_CA (or names another host)."
        )
    option = "--writer / ROLLOUT_WRITER" if service == "writer" else "--reader / ROLLOUT_READER"
    hint = "" if tls_ca_given else " If it serves TLS, pass its CA file with --tls-ca / ROLLOUT_TLS_CA."
    return (
        f"cannot reach the {service} at {address}. Is it running (bash deploy/local/serve.sh)?"
        f" Point {option} at it.{hint}"
    )


def cleartext_token_message(error: ValueError) -> str:
    """The command-line wording of the client library's refusal (ValueError) to send a token in
    clear text: it names the option instead of the library's ``tls_ca=`` argument."""
    return str(error).replace("pass tls_ca= (", "pass --tls-ca / ROLLOUT_TLS_CA (")


def in_command_words(message: str) -> str:
    """``message`` (a service's refusal, a stop fact's reason) with each remedy of
    :mod:`shared.remedies` named as its command (``resume(force=True)`` -> ``rollout resume --force``)."""
    for phrase, command in COMMAND_WORDS.items():
        message = message.replace(phrase, command)
    return message
