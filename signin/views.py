"""The sign-in pages: the choice of password and provider, the start of the
provider's flow and its callback. Whatever goes wrong at the callback (an unknown
or replayed state, a code the provider refuses, a token that fails its checks,
someone outside the allowed groups, the provider unreachable) ends on one page that
says so with status 403, never on a traceback."""

from __future__ import annotations

import logging
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from mozilla_django_oidc import views as oidc_views

from common.signin import LimitedAuthenticationForm
from signin.groups import SignInRefused
from signin.provider import ProviderUnreachable, oidc_setting

log = logging.getLogger(__name__)
DETAIL_CHARS = 200
FAILED = "The sign-in with your company account did not complete. Start again from the sign-in page."
STALE = (
    "This sign-in link is not one this browser started, or it was used already. "
    "Start again from the sign-in page (a link from the provider works only once, in the browser that asked for it)."
)
UNREACHABLE = "Harness could not reach the identity provider. Try again in a minute; if it persists, tell whoever runs Harness."


def refused(request: HttpRequest, message: str, detail: str = "") -> HttpResponse:
    return render(
        request,
        "registration/signin_refused.html",
        {"message": message, "detail": detail[:DETAIL_CHARS], "password_signin": settings.HARNESS_PASSWORD_SIGNIN},
        status=403,
    )


class SignInPage(auth_views.LoginView):
    """The password form (unless HARNESS_PASSWORD_SIGNIN=0) and the provider's button
    (when HARNESS_OIDC_ISSUER is set). With passwords off, a posted password is
    refused before any check."""

    redirect_authenticated_user = True
    authentication_form = LimitedAuthenticationForm
    next_page = "home"

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.HARNESS_PASSWORD_SIGNIN:
            return refused(request, "Passwords are switched off here: sign in with your company account.")
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        context |= {
            "password_signin": settings.HARNESS_PASSWORD_SIGNIN,
            "oidc_signin": settings.HARNESS_OIDC_ENABLED,
            "oidc_name": settings.HARNESS_OIDC_NAME,
        }
        return context


class StartView(oidc_views.OIDCAuthenticationRequestView):
    """Redirects to the provider with a new state, nonce and PKCE challenge (kept in
    the session by the library)."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, **kwargs: Any) -> None:
        # The endpoint is looked up at the request, so an unreachable provider gets a page.
        oidc_views.View.__init__(self, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponseBase:
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except ProviderUnreachable as exc:
            log.warning("OpenID sign-in could not start: %s", exc)
            return refused(request, UNREACHABLE)
        response: HttpResponseBase = super().get(request)
        return response


class CallbackView(oidc_views.OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)

    def get(self, request: HttpRequest) -> HttpResponseBase:
        try:
            response: HttpResponseBase = super().get(request)
        except SignInRefused as exc:
            return refused(request, str(exc))
        except ProviderUnreachable as exc:
            log.warning("OpenID sign-in could not finish: %s", exc)
            return refused(request, UNREACHABLE)
        except SuspiciousOperation as exc:
            # An unknown state (tampered, replayed, another browser's), a nonce or a
            # signature that does not match: the details go to the log, not the page.
            log.warning("OpenID callback refused: %s", exc)
            return refused(request, STALE)
        except (requests.RequestException, jwt.PyJWTError, ValueError) as exc:
            # The token endpoint refused the code (a replayed or expired one, a wrong
            # verifier) or answered nonsense.
            log.warning("OpenID token exchange failed: %s", type(exc).__name__, exc_info=True)
            return refused(request, FAILED)
        return response

    def login_failure(self) -> HttpResponse:
        error = self.request.GET.get("error", "")
        if error:
            return refused(self.request, FAILED, f"The provider answered: {error}")
        return refused(self.request, STALE)
