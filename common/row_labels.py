"""Names for the fields of a table of form rows (the policy editor's rules and checks,
a project's members in the admin). Such a table labels its columns in headings, which
label no field: each field is named for screen readers by its column and its row
("Tool, rule 2"), as axe's label and select-name checks ask."""

from __future__ import annotations

from django import forms
from django.forms.utils import pretty_name


def name_row_fields(form: forms.BaseForm, noun: str, index: int | None) -> None:
    row = "new row" if index is None else f"{noun} {index + 1}"
    for name, field in form.fields.items():
        # The admin's wrapper of a related object's select renders the widget it wraps.
        wrapped = getattr(field.widget, "widget", None)
        widget = wrapped if isinstance(wrapped, forms.Widget) else field.widget
        widget.attrs["aria-label"] = f"{field.label or pretty_name(name)}, {row}"
