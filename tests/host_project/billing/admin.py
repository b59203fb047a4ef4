from django.contrib import admin

from billing.models import Invoice

admin.site.register(Invoice)
