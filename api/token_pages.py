"""A person's own API tokens, on a page: the list (by first characters, with what each
may do and its state), a new one (narrowed to a project and a role they hold there,
or not narrowed) shown once, and revocation. Another person's token is not found.

Here and not in pages: tokens are the API's (api.models), and the two front doors sit
side by side, neither importing the other."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from api.models import ApiToken, NarrowingRefused, check_narrowing, revoke_tokens
from projects.access import permissions_in
from projects.models import Project, Role
from projects.roles import PROJECT_ROLES

NOT_NARROWED = ""


class NewTokenForm(forms.Form):
    project = forms.ChoiceField(label="Project", required=False, help_text="Narrowed to one project, the token acts there alone.")
    role = forms.ChoiceField(
        label="Role", required=False, choices=[(NOT_NARROWED, "—"), *Role.choices], help_text="The most the token may do there."
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        mine = [project for project in Project.objects.all() if permissions_in(user, project.pk)]
        project = self.fields["project"]
        assert isinstance(project, forms.ChoiceField)
        project.choices = [(NOT_NARROWED, "every project, as your roles allow"), *[(p.slug, p.name) for p in mine]]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        slug, role = data.get("project") or None, data.get("role") or None
        if (slug is None) != (role is None):
            self.add_error("role" if slug else "project", "Give a project and a role together, or neither.")
            return data
        try:
            data["narrowed_to"] = check_narrowing(self.user, slug, role)
        except NarrowingRefused as exc:
            for field, messages in exc.errors.items():
                for message in messages:
                    self.add_error(field, message)
        return data


def _person(request: HttpRequest) -> User:
    # login_required let only a signed-in person this far.
    return cast(User, request.user)


def _page(request: HttpRequest, form: NewTokenForm, made: str = "", status: int = 200) -> HttpResponse:
    tokens = ApiToken.objects.filter(user=_person(request)).select_related("project", "user")
    context = {"form": form, "tokens": tokens, "made": made, "roles": {role: sorted(PROJECT_ROLES[role]) for role in PROJECT_ROLES}}
    return render(request, "api/tokens.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    form = NewTokenForm(request.POST or None, user=request.user)
    if request.method == "POST":
        if not form.is_valid():
            return _page(request, form, status=400)
        project: Project | None = form.cleaned_data["narrowed_to"]
        _row, token = ApiToken.issue(_person(request), project, form.cleaned_data["role"] if project is not None else "")
        # Shown in this answer alone (the server keeps its hash), never after a redirect.
        return _page(request, NewTokenForm(user=request.user), made=token)
    return _page(request, form)


@require_POST
@login_required
def revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    mine = ApiToken.objects.filter(user=_person(request), pk=token_id)
    if not mine.exists():
        raise Http404("there is no such token of yours")
    revoke_tokens(mine, request.user)
    return redirect("tokens")
