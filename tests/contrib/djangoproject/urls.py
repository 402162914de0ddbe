from __future__ import annotations

from django.urls import path

from tests.contrib.djangoproject.shop import views

urlpatterns = [path("orders/<int:order>/total", views.total, name="total")]
