"""A view that enqueues a task and answers with its id (as an app's would)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from tests.contrib.djangoproject.shop.tasks import add


def total(request: HttpRequest, order: int) -> JsonResponse:
    result = add.enqueue(order, 1000)
    return JsonResponse({"task": result.id, "status": str(result.status)})
