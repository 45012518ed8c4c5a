from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "tests.django_project.shop"
    label = "shop"
